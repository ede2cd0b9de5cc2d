gcloud dataproc clusters create cdc --region REGION --image-version 2.2-debian12 \
    --service-account cdc-jobs@PROJECT.iam.gserviceaccount.com \
    --properties 'dataproc:pip.packages=deltalake==1.6.6,pyarrow==26.0.1'
